"""Injection metrics on hand-built records (records contract of issue 9), every number by hand.

The task-A table: 4 concepts × 2 trials × 2 samples at cells (L2, α4) and (L4, α4), raw units.
Controls carry no concept (one per trial and sample) and are matched on (variant, trial, sample).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest, chi2

from introspect.records import Record
from introspect.report.load import flatten_trial
from introspect.report.metrics import summarize
from introspect.tasks.injection.metrics_steer import STEER_NATS, steering_table
from introspect.tasks.tidy import add_holm, pair, row

M = "tiny/m"
WORDS = ["w1", "w2", "w3", "w4"]
PROMPTS = [(0, 0), (0, 1), (1, 0), (1, 1)]  # (trial_index, sample)
CTRL_DET = [1, 0, 0, 0]
# detection per concept at L2 in PROMPTS order; pairs vs CTRL_DET give McNemar b=5, c=2
DET_L2 = {"w1": [1, 1, 1, 1], "w2": [0, 1, 1, 0], "w3": [0, 0, 0, 0], "w4": [1, 0, 0, 0]}
DET_L4 = {"w1": [0, 0, 0, 0], "w2": [0, 0, 0, 0], "w3": [0, 0, 1, 1], "w4": [0, 0, 1, 1]}
CTRL_PYES = {0: 0.1, 1: 0.2}  # per trial: p_yes is the first-token probability, same per sample
PYES_L2 = {"w1": (0.5, 0.6), "w2": (0.3, 0.2), "w3": (0.1, 0.2), "w4": (0.15, 0.25)}
LP_RISE = {(2, "w1"): 2.0, (2, "w2"): 0.5, (2, "w3"): 1.0, (2, "w4"): -0.2,
           (4, "w1"): 0.1, (4, "w2"): 0.0, (4, "w3"): 0.3, (4, "w4"): 0.9}


def flat(recs: list[Record]) -> pd.DataFrame:
    return pd.DataFrame([flatten_trial(r.to_dict(), "mem") for r in recs])


def _r(cond: str, i: int, s: int, layer=None, alpha=0.0, word=None, variant="paper",
       **kw) -> Record:
    return Record(seed=0, model_id=M, task="A", condition=cond, layer_idx=layer, alpha=alpha,
                  alpha_units="raw", word=word, variant=variant, trial_index=i, sample=s,
                  injected=layer is not None, **kw)


def task_a_records(identical: bool = False, steer: bool = True) -> list[Record]:
    recs = []
    for k, (i, s) in enumerate(PROMPTS):
        recs.append(_r("control", i, s, grade={"detected": bool(CTRL_DET[k]), "coherent": True},
                       p_yes=CTRL_PYES[i], response=f"ctl {i} {s}"))
    for layer, det in ((2, DET_L2), (4, DET_L4)):
        for w in WORDS:
            for k, (i, s) in enumerate(PROMPTS):
                d = CTRL_DET[k] if identical else det[w][k]
                pyes = CTRL_PYES[i] if identical or layer == 4 else PYES_L2[w][i]
                grade = {"detected": bool(d), "identified": w in ("w1", "w2") and bool(d),
                         "identified_mismatch": w == "w2" and k == 1, "coherent": k != 3}
                recs.append(_r("injected", i, s, layer, 4.0, w, grade=grade, p_yes=pyes,
                               response=f"ctl {i} {s}" if identical else f"inj {w} {i} {s}",
                               extra={"alpha_as": {"raw": 4.0, "unit": 8.0, "resid": 0.5}}))
            recs.append(_r("random", 0, 0, layer, 4.0, w, grade={"detected": w == "w1"}))
    # bias: question q, sample s; injected rows carry the concept w{q+1} and the cell
    for q, (clean, hot) in enumerate(((0.2, 0.25), (0.3, 0.45))):
        for s in (0, 1):
            recs.append(_r("bias", q, s, variant="bias", p_yes=clean,
                           grade={"said_yes": False, "detected": False},
                           extra={"bias_injected": False}))
            for layer in (2, 4):
                recs.append(_r("bias", q, s, layer, 4.0, WORDS[q], variant="bias",
                               p_yes=CTRL_PYES[q] * 0 + (clean if identical else hot),
                               grade={"said_yes": s == 0 and not identical, "detected": False},
                               extra={"bias_injected": True}))
    if steer:
        for w in WORDS:
            for s in (0, 1):
                recs.append(_r("steer_control", 0, s, word=w, variant="steer",
                               grade={"lp_word": -10.0, "mentions": False, "coherent": True}))
                for layer in (2, 4):
                    rise = 0.0 if identical else LP_RISE[(layer, w)]
                    recs.append(_r("steer", 0, s, layer, 4.0, w, variant="steer",
                                   grade={"lp_word": -10.0 + rise, "coherent": True,
                                          "mentions": rise >= 1 and s == 0}))
    return recs


@pytest.fixture(scope="module")
def summary() -> pd.DataFrame:
    return summarize(flat(task_a_records()))


def get(s: pd.DataFrame, metric: str, variant="paper", layer=2, **kw) -> pd.Series:
    m = (s["metric"] == metric) & (s["variant"] == variant)
    m &= s["layer_idx"].isna() if layer is None else s["layer_idx"] == layer
    for k, v in kw.items():
        m &= s[k] == v
    rows = s[m]
    assert len(rows) == 1, f"{metric} {variant} L{layer}: {len(rows)} rows"
    return rows.iloc[0]


# ---------------------------------------------------------------- pairing


def test_pair_joins_on_match_key_and_shares_controls():
    df = flat(task_a_records())
    inj = df[(df.condition == "injected") & (df.layer_idx == 2)]
    p = pair(inj, df[df.condition == "control"])
    assert len(p) == 16  # every injected answer found its control
    assert set(p["concept"]) == set(WORDS)
    # the control of (trial 0, sample 0) is the detected one, whatever the concept
    first = p[(p["trial_index"] == 0) & (p["sample"] == 0)]
    assert first["grade.detected~c"].tolist() == [True] * 4
    assert (p["trial_index"] == p["trial_index~c"]).all() and (p["sample"] == p["sample~c"]).all()
    # a control of another variant or sample is not a match
    other = df[df.condition == "control"].assign(variant="explained")
    assert pair(inj, other).empty


def test_pair_uses_word_when_controls_carry_one():
    rows = [dict(model_id=M, task="C", variant="paper", trial_index=0, sample=0, word=w,
                 condition=c, **{"grade.intentional": c == "injected" and w == "a"})
            for w in ("a", "b") for c in ("control", "injected")]
    df = pd.DataFrame(rows)
    p = pair(df[df.condition == "injected"], df[df.condition == "control"])
    assert len(p) == 2 and (p["word"] == p["word~c"]).all()


# ---------------------------------------------------------------- task A detection


def test_tpr_fpr_net_matched(summary):
    tpr, fpr, net = (get(summary, m) for m in ("tpr", "fpr", "net"))
    assert (tpr.value, tpr.n, tpr.n_clusters) == (7 / 16, 16, 4)
    assert tpr.ci == "cluster-bootstrap(concept)∪wilson"
    # one control serves all four concepts: the FPR counts each of the 4 controls once
    assert fpr.value == pytest.approx(1 / 4) and fpr.n == 4
    assert fpr.ci == "cluster-bootstrap(prompt)∪wilson"  # shared controls cluster by prompt
    assert net.value == pytest.approx(3 / 16) and net.lo <= 3 / 16 <= net.hi
    assert net.ci == "cluster-bootstrap(concept×prompt)"
    # McNemar on the 16 pairs: b = 5 (injected yes, control no), c = 2
    assert net.p == pytest.approx(binomtest(2, 7, 0.5).pvalue) == pytest.approx(58 / 128)
    # clustered: per-concept b−c = 3, 1, −1, 0 -> X² = 3² / 11
    assert net.p_cluster == pytest.approx(chi2.sf(9 / 11, 1))
    # Holm over the two cells on max(p, p_cluster)
    other = get(summary, "net", layer=4)
    ps = [max(net.p, net.p_cluster), max(other.p, other.p_cluster)]
    lo, hi = sorted(ps)
    expected = {lo: min(1, 2 * lo), hi: max(min(1, 2 * lo), hi)}
    assert net.p_holm == pytest.approx(expected[ps[0]])
    assert tpr.lo <= 7 / 16 <= tpr.hi and fpr.lo <= 0.25 <= fpr.hi


def test_rate_interval_never_narrower_than_wilson(summary):
    from introspect.stats import wilson

    tpr = get(summary, "tpr", layer=4)  # 4/16, concepts 0, 0, 0.5, 0.5
    w = wilson(4, 16)
    assert tpr.lo <= w[1] + 1e-12 and tpr.hi >= w[2] - 1e-12


def test_identification_and_mismatch(summary):
    # identified = detected for w1, w2: w1 4 + w2 2 = 6 of 16; mismatch only (w2, prompt 1)
    assert get(summary, "identification").value == pytest.approx(6 / 16)
    assert get(summary, "identification_given_detected").value == pytest.approx(6 / 7)
    assert get(summary, "identification_mismatch").value == pytest.approx(1 / 16)
    d = get(summary, "identification_minus_mismatch")
    assert d.value == pytest.approx(5 / 16)
    # paired within the same answers: (w2, prompt 1) names both -> concordant; the other five
    # identified answers name only the injected concept: b = 5, c = 0
    assert d.p == pytest.approx(binomtest(0, 5, 0.5).pvalue)


def test_ablations_coherence_and_alpha_units(summary):
    assert get(summary, "random_detection").value == pytest.approx(1 / 4)
    assert get(summary, "coherent:injected").value == pytest.approx(12 / 16)
    assert get(summary, "coherent:control").value == 1.0
    # coherent answers only: drop prompt (1, 1) -> w1 3, w2 2, w3 0, w4 1 of 12
    assert get(summary, "tpr:coherent").value == pytest.approx(6 / 12)
    # controls are all coherent: FPR among them unchanged
    assert get(summary, "fpr:coherent").value == pytest.approx(4 / 16)
    # pairs with both coherent: 12 pairs; injected 6, controls 4 (prompt (0,0) is coherent)
    assert get(summary, "net:coherent").value == pytest.approx(6 / 12 - 4 / 12)
    assert get(summary, "alpha_as:resid").value == pytest.approx(0.5)
    assert get(summary, "alpha_as:unit").value == pytest.approx(8.0)


def test_p_yes_and_introspection_score(summary):
    assert get(summary, "p_yes_mean:control").value == pytest.approx(0.15)
    shift = get(summary, "p_yes_shift")
    assert shift.value == pytest.approx(1.1 / 8)
    b = get(summary, "p_yes_shift:bias", variant="bias")
    assert b.value == pytest.approx(0.10)
    assert get(summary, "p_yes_mean:bias_clean", variant="bias").value == pytest.approx(0.25)
    assert get(summary, "p_yes_mean:bias_injected", variant="bias").value == pytest.approx(0.35)
    score = get(summary, "introspection_score")
    assert score.value == pytest.approx(1.1 / 8 - 0.10)
    assert score.ci == "cluster-bootstrap(concept)" and score.lo <= score.value <= score.hi
    # bias yes-rate: injected said yes on sample 0 only; clean never
    assert get(summary, "bias_yes:injected", variant="bias").value == 0.5
    assert get(summary, "bias_yes_diff", variant="bias").value == pytest.approx(0.5)
    assert not ((summary["variant"] == "bias") & (summary["metric"] == "tpr")).any()


# ---------------------------------------------------------------- steering


def test_steering_table_and_share(summary):
    t = steering_table(flat(task_a_records()))
    l2 = t[t.layer_idx == 2].set_index("word")
    assert l2.loc["w1", "lp_rise"] == pytest.approx(2.0) and l2.loc["w1", "steers"]
    assert l2.loc["w3", "steers"]  # exactly 1 nat steers (rule: ≥ 1)
    assert not l2.loc["w2", "steers"] and not l2.loc["w4", "steers"]
    assert STEER_NATS == 1.0
    share = get(summary, "steer_share", variant="steer")
    assert share.value == 0.5 and share.n == 4 and "lp rise ≥ 1 nat" in share.note
    # the same share sits beside the detection numbers of the cell
    assert get(summary, "steer_share").value == 0.5
    assert get(summary, "steer_share", layer=4).value == 0.0
    assert get(summary, "steer_lp_rise", variant="steer").value == pytest.approx(
        (2.0 + 0.5 + 1.0 - 0.2) / 4)
    assert get(summary, "steer_lp_rise:w4", variant="steer").value == pytest.approx(-0.2)
    assert get(summary, "steers:w3", variant="steer").value == 1.0
    assert get(summary, "steer_mention:steer", variant="steer").value == pytest.approx(2 / 8)
    assert get(summary, "steer_mention:control", variant="steer").value == 0.0


def test_detection_conditional_on_steering(summary):
    # L2 steering concepts w1, w3: 4 + 0 of 8; not steering w2, w4: 2 + 1 of 8
    assert get(summary, "tpr:steering").value == pytest.approx(0.5)
    assert get(summary, "tpr:not_steering").value == pytest.approx(3 / 8)
    # Net among steering concepts: (4 + 0)/8 − controls (1 + 1)/8
    assert get(summary, "net:steering").value == pytest.approx(4 / 8 - 2 / 8)


def test_verdict_effect_present(summary):
    v = get(summary, "no_measurable_effect", variant="all", layer=None)
    assert v.value == 0.0 and "2 of 8 (concept, layer, α) steer" in v.note


def test_no_effect_flag_when_nothing_moves():
    s = summarize(flat(task_a_records(identical=True)))
    v = get(s, "no_measurable_effect", variant="all", layer=None)
    assert v.value == 1.0
    assert v.note.startswith("injection had no measurable effect")
    assert "no (concept, layer, α) of 8 steers" in v.note and "100% of injected answers" in v.note
    assert get(s, "answers_identical").value == 1.0
    net = get(s, "net")
    assert net.value == 0.0 and net.p == 1.0
    # no discordant pair in 16: not a clean [0, 0] but ± the Wilson bound on discordance
    from introspect.stats import wilson

    assert (net.lo, net.hi) == pytest.approx((-wilson(0, 16)[2], wilson(0, 16)[2]))
    assert net.ci.endswith("∪wilson(discordant)")


def test_no_effect_without_steering_check():
    s = summarize(flat(task_a_records(identical=True, steer=False)))
    v = get(s, "no_measurable_effect", variant="all", layer=None)
    assert v.value == 1.0 and "no steering check, answers identical" in v.note
    s2 = summarize(flat(task_a_records(identical=False, steer=False)))
    v2 = get(s2, "no_measurable_effect", variant="all", layer=None)
    # answers differ but no cell is significant and P(yes) moved ≥ 0.05 at L2 -> an effect
    assert v2.value == 0.0


# ---------------------------------------------------------------- split half and Holm


def test_split_half_reports_on_held_out_concepts(summary):
    held = summary[summary["metric"] == "net@held_out"]
    assert len(held) == 1
    r = held.iloc[0]
    sel = [w for w in WORDS if f"'{w}'" in r.note.split("estimate on")[0]]
    out = [w for w in WORDS if w not in sel]
    assert len(sel) == 2 and sorted(sel + out) == WORDS

    def net(det, words):
        return np.mean([det[w][k] - CTRL_DET[k] for w in words for k in range(4)])

    best = 2 if net(DET_L2, sel) >= net(DET_L4, sel) else 4
    assert r.layer_idx == best
    assert r.value == pytest.approx(net(DET_L2 if best == 2 else DET_L4, out))
    assert get(summary, "tpr@held_out", layer=best).n == 8
    assert get(summary, "fpr@held_out", layer=best).n == 4


def test_holm_known_values():
    rows = [row({"model_id": M, "task": "A", "variant": "v", "layer_idx": k}, "net",
                (0, 0, 0), 1, p=p) for k, p in enumerate((0.01, 0.04, 0.03))]
    rows.append(row({"model_id": M, "task": "A", "variant": "v", "layer_idx": 9}, "net",
                    (0, 0, 0), 1, p=0.001, p_cluster=0.02))  # the conservative p counts: 0.02
    add_holm(rows)
    # sorted 0.01, 0.02, 0.03, 0.04 -> ×4, ×3, ×2, ×1 with monotonicity: .04, .06, .06, .06
    assert [r["p_holm"] for r in rows] == pytest.approx([0.04, 0.06, 0.06, 0.06])
    other = row({"model_id": M, "task": "A", "variant": "w"}, "net", (0, 0, 0), 1, p=0.01)
    add_holm([other])
    assert other["p_holm"] == pytest.approx(0.01)  # its own family of one


# ---------------------------------------------------------------- tasks B, C, D


def _bc(task, cond, word, i, s, layer=None, grade=None, **kw) -> Record:
    return Record(seed=0, model_id=M, task=task, condition=cond, layer_idx=layer,
                  alpha=4.0 if layer else 0.0, alpha_units="raw", word=word, variant="paper",
                  trial_index=i, sample=s, grade=grade or {}, extra={"sentence": f"s{i}"}, **kw)


def test_task_b_paired_mcnemar():
    recs = []
    # thought_correct: control never; injected correct on 3 of 4 samples for a, 1 of 4 for b
    for w, hits in (("a", [1, 1, 1, 0]), ("b", [0, 1, 0, 0])):
        for k, (i, s) in enumerate(PROMPTS):
            recs.append(_bc("B", "control", w, i, s, grade={"thought_correct": False,
                                                          "repeat_correct": True}))
            recs.append(_bc("B", "injected", w, i, s, 2, grade={"thought_correct": bool(hits[k]),
                                                              "repeat_correct": k != 0}))
    s = summarize(flat(recs))
    tc = get(s, "delta_thought_correct", layer=2)
    assert tc.value == pytest.approx(4 / 8) and tc.n == 8 and tc.n_clusters == 2
    assert tc.p == pytest.approx(binomtest(0, 4, 0.5).pvalue)  # b = 4, c = 0: exact
    assert tc.p_cluster == pytest.approx(chi2.sf(16 / 10, 1))  # d = 3, 1
    assert get(s, "thought_correct:control", layer=2).value == 0.0
    rc = get(s, "delta_repeat_correct", layer=2)
    assert rc.value == pytest.approx(-2 / 8)
    assert not (s["metric"] == "no_measurable_effect").any()  # no answer text: no verdict
    assert get(s, "thought_correct:injected", layer=2).ci == "cluster-bootstrap(concept)∪wilson"


def test_task_b_verdict_from_identical_answers():
    recs = []
    for w in ("a", "b", "c"):
        for i, s in PROMPTS:
            for cond, layer in (("control", None), ("injected", 2)):
                recs.append(_bc("B", cond, w, i, s, layer, grade={"thought_correct": False},
                                response=f"the same words {w} {i} {s}"))
    v = get(summarize(flat(recs)), "no_measurable_effect", variant="all", layer=None)
    assert v.value == 1.0 and v.note.startswith("injection had no measurable effect: 100%")


def test_task_c_matched_deltas():
    recs = []
    vals = {"control": [False, False, None, True], "injected": [True, True, None, False],
            "mismatch": [False, True, False, False]}
    for w in ("a", "b"):
        for cond, v in vals.items():
            for k, (i, s) in enumerate(PROMPTS):
                recs.append(_bc("C", cond, w, i, s, None if cond == "control" else 3,
                                grade={"intentional": v[k]}))
    s = summarize(flat(recs))
    assert get(s, "intentional:control", layer=3).value == 0.25
    assert get(s, "unknown:control", layer=3).value == 0.25
    d = get(s, "delta_intentional:injected", layer=3)
    assert d.value == pytest.approx(0.25) and d.n == 8
    # pairs (inj, ctl) per concept: (1,0), (1,0), (0,0), (0,1): b = 4, c = 2 over two concepts
    assert d.p == pytest.approx(binomtest(2, 6, 0.5).pvalue)
    assert get(s, "delta_intentional:mismatch", layer=3).value == pytest.approx(0.0)
    assert get(s, "delta_intentional:injected-mismatch", layer=3).value == pytest.approx(0.25)


def _d(cond, word, i, cos, centred, ctrl, variant="plain") -> Record:
    return Record(seed=0, model_id=M, task="D", condition=cond, word=word, variant=variant,
                  trial_index=i, extra={"sentence": f"s{i}"},
                  grade={"layers": [0, 1], "cos": cos, "cos_centred": centred, "cos_ctrl": ctrl,
                         "cos_ctrl_centred": [c / 2 for c in ctrl]})


def test_task_d_contrasts_raw_centred_and_band():
    recs = []
    for j, (w, off) in enumerate((("a", -0.3), ("b", 0.0), ("c", 0.4))):
        for variant, (x, y) in (("plain", ("think", "dont_think")),
                                ("incentive", ("rewarded", "punished"))):
            bump = 0.02 if variant == "plain" else 0.01
            recs.append(_d(x, w, 0, [off + bump, off + 2 * bump], [bump, 3 * bump],
                           [0.01, 0.01], variant))
            recs.append(_d(y, w, 0, [off, off], [0.0, 0.0], [0.01 - 0.002 * j, 0.0], variant))
    s = summarize(flat(recs))
    plain = {"variant": "plain"}
    assert get(s, "delta_cos", layer=1, **plain).value == pytest.approx(0.04)
    assert get(s, "delta_cos_centred", layer=1, **plain).value == pytest.approx(0.06)
    inc = get(s, "delta_cos", variant="incentive", layer=0)
    assert inc.value == pytest.approx(0.01) and inc.condition == "rewarded-punished"
    band = get(s, "delta_cos_ctrl", layer=0, **plain)  # 0, 0.002, 0.004 -> mean 0.002
    assert band.value == pytest.approx(0.002) and band.n_clusters == 3
    assert band.lo < band.value < band.hi and band.ci == "cluster-bootstrap(concept)"
    # the paired difference removes the per-word offsets (−0.3, 0, 0.4): no spread left
    d0 = get(s, "delta_cos", layer=0, **plain)
    assert d0.lo == pytest.approx(0.02) and d0.hi == pytest.approx(0.02)
    spec = get(s, "delta_cos_specific", layer=0, **plain)
    assert spec.value == pytest.approx(0.02 - 0.002)
    assert get(s, "peak_layer", layer=None, **plain).value == 1
    assert get(s, "delta_cos_ctrl_centred", layer=0, **plain).value == pytest.approx(0.001)
    assert math.isfinite(get(s, "auc_delta_cos_centred", layer=None, **plain).value)
