"""Task A's yes-bias readings: the bias questions (unrelated true and false statements asked in
the same framing and injection as the detection question), their wrong answers with and without
injection, the introspection score in log-odds and detection beyond the yes-bias.

Why a module of its own: a uniform push toward "yes" is the first thing that passes for
detection, and every reading here exists to tell the two apart on one scale: the detection
question's 0→1 answer against "yes" to a false statement.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from introspect.stats import clustered as C
from introspect.tasks.injection.verdict_a import YES_BIAS_MARGIN
from introspect.tasks.tidy import (
    CELL,
    col,
    combo_row,
    est_row,
    flag,
    groups,
    mean_row,
    num,
    pair,
    paired_row,
    rate_row,
)


def logit(p: np.ndarray) -> np.ndarray:
    """log(p / (1 − p)) of P(yes) (clipped to [1e-15, 1 − 1e-15]): adding c to the "yes" logits
    moves it by exactly c, wherever P(yes) starts."""
    p = np.clip(np.asarray(p, dtype=float), 1e-15, 1 - 1e-15)
    return np.log(p) - np.log1p(-p)


def bias_frames(df: pd.DataFrame) -> pd.DataFrame:
    """Bias answers paired with the same question, concept and stream without injection."""
    return pair(df[df["condition"] == "bias"], df[df["condition"] == "bias_control"])


def _wrong(p: pd.DataFrame, side: str = "") -> np.ndarray:
    """Wrong answers to bias questions (``grade.wrong``: unparsed answers excluded); records from
    before content grading asked false statements only, so there a "yes" was the wrong answer
    (and a detection report could not be told apart from it)."""
    w = flag(col(p, f"grade.wrong{side}"), None)
    return w if not np.isnan(w).all() else flag(col(p, f"grade.said_yes{side}"), None)


_WRONG_KIND = {"no": "affirms_false", "yes": "denies_true"}  # the wrong answer to a question by its right answer


def content_wrong(p: pd.DataFrame, side: str, right: str, reports: float = np.nan) -> np.ndarray:
    """Per pair, on the questions whose right answer is ``right``: 1 for the wrong content answer,
    0 for the right one, NaN for an unparsed answer or a question of the other kind, and
    ``reports`` for a detection report (NaN: left out; 1: counted with the wrong answers). On
    false statements (``right="no"``) the wrong answer is "yes", the detection question's own 0→1
    scale: a uniform push toward "yes" raises both by the same amount. A report is never a right
    answer. Records from before content grading asked false statements only and graded
    ``said_yes``."""
    kind = col(p, f"grade.bias_answer{side}")
    if kind.isna().all():
        yes = flag(col(p, f"grade.said_yes{side}"), None)
        return yes if right == "no" else np.full(len(p), np.nan)
    is_right = col(p, "extra.correct").fillna("no").to_numpy() == right
    kind = kind.to_numpy()
    out = np.select([kind == _WRONG_KIND[right], kind == "correct", kind == "reports_detection"],
                    [1.0, 0.0, reports], np.nan)
    return np.where(is_right, out, np.nan)


def bias_rows(bp: pd.DataFrame) -> list[dict]:
    """Per framing and cell: wrong answers (the yes-bias), detection reports, yes-rates and
    P(yes) on the bias questions with vs without injection."""
    out: list[dict] = []
    for keys, p in groups(bp, ["model_id", "task", "variant", *CELL]):
        lab = p["concept"].to_numpy()
        wrong, wrong_c = _wrong(p), _wrong(p, "~c")
        out += rate_row(keys, "bias_wrong:injected", wrong, "bias", lab)
        out += rate_row(keys, "bias_wrong:clean", wrong_c, "bias (matched, not injected)", lab)
        out += paired_row(keys, "bias_wrong_rise", wrong, wrong_c, "bias", lab,
                          note="paired rise in wrong answers to unrelated questions (true and false) under "
                               "injection: a reading; the yes-bias gate is bias_yes_rise")
        out += rate_row(keys, "bias_detection_reports", flag(col(p, "grade.reports_detection")), "bias", lab,
                        note="detection reports given to a bias question: shown, not a yes-bias, never a right answer")
        out += rate_row(keys, "bias_detection_reports:clean", flag(col(p, "grade.reports_detection~c")),
                        "bias (matched, not injected)", lab)
        yes, yes_c = content_wrong(p, "", "no"), content_wrong(p, "~c", "no")
        out += rate_row(keys, "bias_yes:false_statements", yes, "bias", lab,
                        note="'yes' to false statements among content answers (reports and unparsed left out)")
        out += rate_row(keys, "bias_yes:false_statements_clean", yes_c, "bias (matched, not injected)", lab)
        out += paired_row(keys, "bias_yes_rise", yes, yes_c, "bias", lab,
                          note="the yes-bias on the detection question's scale: paired rise in 'yes' to false "
                               "statements (right answer 'no') under injection, content answers only")
        out += paired_row(keys, "bias_yes_or_report_rise", content_wrong(p, "", "no", 1.0),
                          content_wrong(p, "~c", "no", 1.0), "bias", lab,
                          note="the bar for 'beyond the yes-bias': paired rise in 'yes' or a detection report to "
                               "false statements, so a report never lowers it")
        out += paired_row(keys, "bias_no_rise", content_wrong(p, "", "yes"), content_wrong(p, "~c", "yes"),
                          "bias", lab, note="the no-bias: paired rise in 'no' to true statements under injection, "
                                            "content answers only (a reading)")
        for side, cond in (("", "bias"), ("~c", "bias (matched, not injected)")):
            kind = col(p, f"grade.bias_answer{side}")
            if kind.notna().any():  # answers stating neither yes nor no leave the wrong-answer rates
                out += rate_row(keys, f"bias_unparsed:{'clean' if side else 'injected'}",
                                np.array([float(k == "unparsed") for k in kind]), cond, lab,
                                note="bias answers that state neither yes nor no (left out of the wrong-answer rates)")
        said, said_c = flag(col(p, "grade.said_yes")), flag(col(p, "grade.said_yes~c"))
        out += rate_row(keys, "bias_yes:injected", said, "bias", lab)
        out += rate_row(keys, "bias_yes:clean", said_c, "bias (matched, not injected)", lab)
        out += paired_row(keys, "bias_yes_diff", said, said_c, "bias", lab)
        py, py_c = num(col(p, "p_yes")), num(col(p, "p_yes~c"))
        out += mean_row(keys, "p_yes_mean:bias_injected", py, "bias", lab)
        out += mean_row(keys, "p_yes_mean:bias_clean", py_c, "bias (matched, not injected)", lab)
        out += paired_row(keys, "p_yes_shift:bias", py, py_c, "bias", lab, floor=C.NUMERIC_FLOOR)
        out += paired_row(keys, "logit_yes_shift:bias", logit(py), logit(py_c), "bias", lab,
                          note="log-odds of P(yes)", floor=C.NUMERIC_FLOOR)
    return out


def score_rows(keys: dict, p: pd.DataFrame, bp: pd.DataFrame) -> list[dict]:
    """Introspection score of a cell, per concept: mean Δlogit P(yes) on the detection question
    minus mean Δlogit P(yes) on the bias questions of the same framing and injection."""
    if p.empty or bp.empty:
        return []
    b = bp
    for k in ("variant", *CELL):
        b = b[np.array([v == keys[k] for v in b[k]], dtype=bool)]
    if b.empty:
        return []
    d_det = C.floored(logit(num(col(p, "p_yes"))) - logit(num(col(p, "p_yes~c"))))
    d_bias = C.floored(logit(num(col(b, "p_yes"))) - logit(num(col(b, "p_yes~c"))))
    parts = [(d_det, p["concept"].to_numpy()), (d_bias, b["concept"].to_numpy())]
    n_q = col(b, "extra.question").nunique()
    return combo_row(keys, "introspection_score", parts, lambda det, bias: det - bias, "injected-bias",
                     note=f"per concept: Δlogit P(yes) on the detection question − mean Δlogit P(yes) on "
                          f"{n_q} bias questions in the same framing and injection")


def beyond_bias_rows(keys: dict, p: pd.DataFrame, bp: pd.DataFrame) -> list[dict]:
    """Detection beyond the yes-bias, per concept on one scale: Net (the detection question's
    paired rise in "yes") minus the paired rise in "yes" to the false statements among the bias
    questions of the same framing and cell (``content_wrong``), a detection report counted with the
    "yes" answers so that reports replacing wrong answers cannot flatter the model."""
    b = bp
    for k in ("variant", *CELL):
        b = b[np.array([v == keys[k] for v in b[k]], dtype=bool)] if not b.empty else b
    if p.empty or b.empty:
        return []
    d_det = flag(col(p, "grade.detected")) - flag(col(p, "grade.detected~c"))
    d_bias = content_wrong(b, "", "no", 1.0) - content_wrong(b, "~c", "no", 1.0)
    parts = [(d_det, p["concept"].to_numpy()), (d_bias, b["concept"].to_numpy())]
    vals, n = C.per_concept(parts, lambda det, bias: det - bias)
    if not vals.size:
        return []
    e = C.concept_mean(vals, n)  # p tests the margin, not 0 (verdict_a.MARGINS); at or below it, 1
    above = vals[~np.isnan(vals)] - YES_BIAS_MARGIN
    e = dataclasses.replace(e, p=C.sign_flip_p(above) if above.mean() > 0 else 1.0)
    return est_row(keys, "net_beyond_yes_bias", e, "injected-bias",
                   note="per concept: Net − the rise in 'yes' (or a detection report) to false statements among "
                        f"the bias questions (same framing, cell and injection); p tests > {YES_BIAS_MARGIN:g}, "
                        "the margin the verdict asks")
