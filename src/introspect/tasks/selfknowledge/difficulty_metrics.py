"""SEB difficulty's summary (002 §3.3): pair accuracies against the sampled truth, the surface
rules a pair accuracy must beat, and the truth's own health.

Two surfaces: question length (a rule fitted out of group, and the logit reading's accuracy
beyond it, paired by pair), and the generator's difficulty knobs: on arithmetic, a pair whose
questions share digits and terms is one the knobs call equally hard, so the logit pair accuracy
on those pairs alone (``logit_pair_accuracy_knob_matched``) is not read off the knobs.

Why a module of its own: the difficulty reading has the most baselines of the SEB tasks, and
each is a reason its accuracy may not be self-knowledge.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from introspect.stats.auroc import auroc_ci
from introspect.stats.clustered import paired_mean_diff
from introspect.stats.intervals import bootstrap_mean
from introspect.stats.items import boot_mean
from introspect.tasks.selfknowledge.rows import (
    ab_letter,
    b,
    draw_rows,
    frame,
    groups,
    isnum,
    lists,
    modal_letter,
    n_unique,
    num,
    order_consistency,
    prop,
    row,
    value,
)


def _length_rule(longer_right: np.ndarray, groups_: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The length baseline fitted out of group: each question group is scored by the direction
    ("longer is harder" or "shorter is harder") that the other groups favour, so an agent whose
    difficulty follows length either way meets a baseline that follows it too, and the baseline
    never sees the group it scores. Returns (pair scores, their groups) for a clustered interval."""
    out = longer_right.astype(float).copy()
    for grp in np.unique(groups_):
        rest = longer_right[groups_ != grp]
        if rest.size and rest.mean() < 0.5:
            out[groups_ == grp] = 1.0 - longer_right[groups_ == grp]
    return out, groups_


def summarize_seb_difficulty(df: pd.DataFrame) -> pd.DataFrame:
    """Pair accuracies (text and logit) against the sampled truth, and the truth's own health:
    answer parse, cut and exclusion rates, excluded pairs, K; a pair without a truth (a question
    with no usable draw) is excluded from every score and counted in ``pair_excluded_rate``."""
    rows: list[dict] = []
    for keys, s in groups(df):
        ok, acc = b(s, "parse_ok"), num(s, "pair_accuracy")
        rows.append(row(keys, "text_pair_accuracy", bootstrap_mean(acc), int(np.isfinite(acc).sum())))
        rows.append(row(keys, "text_adjusted_pair_accuracy", bootstrap_mean(acc[ok]), int((ok & np.isfinite(acc)).sum())))
        rows += prop(keys, "text_parse_rate", ok.sum(), len(s))
        rows += prop(keys, "rank_cut_rate", b(s, "rank_cut").sum(), len(s)) if "grade.rank_cut" in s else []
        la = num(s, "pair_accuracy_logit")
        rows.append(row(keys, "logit_pair_accuracy", bootstrap_mean(la), int(np.isfinite(la).sum())))
        P, T, C, surf, surf_c, logit_k, firstA, matched, matched_c = [], [], [], [], [], [], [], [], []
        kn = lists(s, "question_knobs") if "grade.question_knobs" in s else [None] * len(s)
        for gi, (ph, tr, ql, pab, kb) in enumerate(zip(lists(s, "p_harder"), lists(s, "pair_truth"),
                                                       lists(s, "question_length"), lists(s, "p_first_is_A"), kn)):
            for k, (i, j) in enumerate([(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)][:len(tr)]):
                if not isnum(tr[k]):
                    continue
                # the logit reading's credit on this pair, as ``pair_credit``: ½ for a true tie
                credit = np.nan if not isnum(ph[k]) else 0.5 if tr[k] == 0.5 else float((float(ph[k]) >= 0.5) == (tr[k] == 1))
                if kb and kb[i] is not None and list(kb[i]) == list(kb[j]) and np.isfinite(credit):
                    matched.append(credit)
                    matched_c.append(gi)
                if tr[k] != 0.5 and isnum(ph[k]):
                    P.append(float(ph[k]))
                    T.append(float(tr[k]))
                    C.append(gi)
                if ql:  # does "the longer question is harder" get this pair right
                    surf.append(0.5 if tr[k] == 0.5 or ql[i] == ql[j] else float((ql[i] > ql[j]) == (tr[k] == 1)))
                    surf_c.append(gi)
                    logit_k.append(credit)
            firstA += [x for pr in pab for x in pr if isnum(x)]
        if P:
            p, y, c = np.array(P), np.array(T), np.array(C)
            rows.append(row(keys, "logit_pair_auroc", auroc_ci(p, y > 0.5, c), p.size, n_items=n_unique(c)))
            rows.append(row(keys, "logit_pair_brier", boot_mean((p - y) ** 2, c), p.size, n_items=n_unique(c)))
        if surf:
            x, c = _length_rule(np.array(surf), np.array(surf_c))
            rows.append(row(keys, "surface_length_pair_accuracy", boot_mean(x, c), x.size, n_items=n_unique(c)))
            lk = np.array(logit_k)
            ok = np.isfinite(lk)
            if n_unique(c[ok]) >= 2:  # the logit reading minus the length rule on the same pairs: t over groups
                d = paired_mean_diff(lk[ok], x[ok], c[ok])
                rows.append(row(keys, "logit_pair_accuracy_beyond_length", d.interval, int(ok.sum()), n_items=d.g))
                rows.append(value(keys, "logit_pair_accuracy_beyond_length_p", d.p, int(ok.sum()), n_items=d.g))
        if matched:  # pairs the generator made equally hard by its knobs: what is left is the model's own
            mc = np.array(matched_c)
            rows.append(row(keys, "logit_pair_accuracy_knob_matched", boot_mean(np.array(matched), mc), len(matched),
                            n_items=n_unique(mc)))
        if T:  # always answering "the first of the pair is harder" (or always the second)
            rows.append(value(keys, "majority_pair_baseline", max(np.mean(T), 1 - np.mean(T)), len(T)))
        if firstA:
            rows.append(row(keys, "position_bias_p_A", bootstrap_mean(firstA), len(firstA), n_items=len(s)))
        # the letter each A/B decision (both orders) chose: asking both orders cancels a letter
        # prior in p_harder, and this rate shows how much prior there was to cancel
        rows += modal_letter(keys, "pair_modal_letter_rate", [ab_letter(x) for v in lists(s, "p_first_is_A")
                                                              for pr in v for x in pr], n_items=len(s))
        pairs = [([ab_letter(x) for x in pr], k) for k, v in enumerate(lists(s, "p_first_is_A")) for pr in v]
        rows += order_consistency(keys, "pair_order_consistency", [x for x, _ in pairs], [k for _, k in pairs])
        pm = np.array([float(x) for v in lists(s, "pair_mass") for pr in v for x in pr if isnum(x)])
        if pm.size:  # the A/B decision's mass on "A" and "B", both orders of each pair
            rows.append(row(keys, "pair_mean_mass", bootstrap_mean(pm), pm.size, n_items=len(s)))
            rows += prop(keys, "pair_low_mass_rate", float((pm < 0.5).sum()), pm.size, n_items=len(s))
        truth = [t for v in lists(s, "pair_truth") for t in v]
        rows += prop(keys, "pair_excluded_rate", sum(not isnum(t) for t in truth), len(truth), n_items=len(s))
        rows += prop(keys, "pair_tie_rate", sum(t == 0.5 for t in truth if isnum(t)), sum(isnum(t) for t in truth),
                     n_items=len(s))
        pc = [x for v in lists(s, "p_correct") for x in v if isnum(x)]
        rows.append(row(keys, "question_accuracy", bootstrap_mean(pc), len(pc)))
        nq = len(pc)  # the draw-level rates below count answers; their items are the questions
        parsed = [x for v in lists(s, "answer_parsed") for d in v for x in d]
        cuts = [x for v in lists(s, "answer_cut") for d in v for x in d]
        rows += prop(keys, "answer_cut_rate", sum(map(bool, cuts)), len(cuts), n_items=nq)
        if parsed and len(parsed) == len(cuts):
            uncut = [p for p, c in zip(parsed, cuts) if not c]
            rows += prop(keys, "answer_parse_rate", sum(map(bool, uncut)), len(uncut), n_items=nq)
            rows += prop(keys, "answer_excluded_rate", sum(c or not p for p, c in zip(parsed, cuts)), len(cuts),
                         n_items=nq)
        how = [x for v in lists(s, "answer_read_as") for d in v for x in d if x is not None]
        rows += prop(keys, "answer_read_from_result_rate", sum(x == "result" for x in how), len(how), n_items=nq)
        toks = [x for v in lists(s, "n_tokens") for d in v for x in (d if isinstance(d, list) else [d])]
        rows.append(row(keys, "mean_answer_tokens", bootstrap_mean(toks), len(toks), n_items=nq))
        rows += draw_rows(keys, num(s, "n_draws"), len(s))
    return frame(rows)
